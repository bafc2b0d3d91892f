"""simic"""
