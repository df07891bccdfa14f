"""Placeholder: filled in by its component."""
