"""tolaria"""
