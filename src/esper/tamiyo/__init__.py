"""tamiyo"""
