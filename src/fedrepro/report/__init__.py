"""Target registry, comparison of rebuilt values with printed ones, tables and the replication report."""
