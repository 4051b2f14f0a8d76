"""tdrl.ops."""
