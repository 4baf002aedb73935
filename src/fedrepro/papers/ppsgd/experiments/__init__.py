"""The experiment kinds of config/ppsgd.yaml (declared in fedrepro.papers.ppsgd.KINDS)."""
