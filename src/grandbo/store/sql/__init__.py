"""SQL both backends run, written once; each backend passes its dialect (`Dialect`, its own `dialect.py`)."""
