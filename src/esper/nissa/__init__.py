"""nissa"""
