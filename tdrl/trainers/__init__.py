"""tdrl.trainers."""
