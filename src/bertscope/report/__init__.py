"""Reports: terminal tables, plots."""
