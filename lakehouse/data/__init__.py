"""Table data: Parquet data files, deletion vectors and predicates."""
