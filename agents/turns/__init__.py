"""turns"""
