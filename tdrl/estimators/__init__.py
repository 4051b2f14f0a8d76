"""tdrl.estimators."""
