"""Datasets: canonical sources with checksums, an offline mirror, and parsers."""
