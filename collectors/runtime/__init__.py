"""What built a target (collectors layer): its runtime from the executable, names for stripped Go frames."""
