"""kasmina"""
