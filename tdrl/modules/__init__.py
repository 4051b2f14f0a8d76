"""tdrl.modules."""
