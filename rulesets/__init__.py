"""The shipped .bbr rule sets."""
