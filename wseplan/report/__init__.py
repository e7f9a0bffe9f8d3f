"""Output writers: tables, JSON, CSV, Markdown (and later reports and plots)."""
