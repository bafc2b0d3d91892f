"""kasmina/blueprints"""
