"""The HTTP routes, one module per noun; ``create_app`` includes each one's ``router()``."""
