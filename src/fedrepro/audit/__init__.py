"""Paper-free experiment kinds that audit other experiments: they read the configuration, the registries and other
runs' results, so they sit above the report and the run files, unlike the kinds of fedrepro.experiments.

    forensics   forensic_sweep: an experiment rerun under every reading of the values the paper leaves open, and
                what each reading does to the registry rows it explains
"""
