"""Work graphs: their models, lenient reading, the path rules, loading and walking."""
