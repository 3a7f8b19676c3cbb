def drill() -> None:
    """placeholder"""
