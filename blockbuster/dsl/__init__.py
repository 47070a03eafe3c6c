"""The .bbr rule language: parsing, checking and compiling rule files."""
