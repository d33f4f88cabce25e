"""The report: `dtrlab reproduce`, its figures, claims, and the self-contained HTML and Markdown."""
