"""What the faces show about runs, read from their files: summaries, figures across runs,
diffs, the liaison's answers, which live view, the crew's processes."""
