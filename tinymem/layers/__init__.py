"""Layer families kept out of nn.py so it stays short; nn.py re-exports them."""
