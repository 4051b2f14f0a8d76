"""tdrl.data."""
