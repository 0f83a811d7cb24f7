"""Formula files several profiles list (shared/FILE.yaml in their profile.yaml), read through importlib.resources."""
