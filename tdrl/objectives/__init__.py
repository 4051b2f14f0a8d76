"""tdrl.objectives."""
