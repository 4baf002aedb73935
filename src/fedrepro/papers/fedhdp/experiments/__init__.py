"""The experiment kinds of config/fedhdp.yaml (declared in fedrepro.papers.fedhdp.KINDS)."""
