def run() -> None:
    """placeholder"""
