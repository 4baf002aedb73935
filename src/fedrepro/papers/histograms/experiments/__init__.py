"""The experiment kinds of config/histograms.yaml (declared in fedrepro.papers.histograms.KINDS)."""
