"""Data files of vramwise, read through importlib.resources."""
