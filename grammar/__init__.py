"""The Lark grammar shared by block programs and .bbr rule files (bbr.lark)."""
