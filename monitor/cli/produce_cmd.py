def produce() -> None:
    """placeholder"""
