"""fedrepro: every reported number of four private/personalized FL papers as a rebuildable target.

The packages in layers, highest first. A module imports from its own package and from the layers below it, never
from above (tests/test_architecture.py reads every import, those inside functions too):

    papers/{adaped,fedhdp,histograms,ppsgd}   everything one paper needs: estimators, algorithms, models,
                                              experiment kinds, figure styles, its privacy statements
    cli, audit, compare, archive              the command line; kinds that audit other runs (forensic sweeps,
                                              printed relations); a user's method under a paper's protocol; the
                                              results archive (paper-scale runs kept, verified, replayed, restored)
    report, plots, learning, aggregate,       verdicts, tables, pages; figure house style; the FL engine and the
    staleness                                 paper-free algorithms; a run's seeds into one summary; whether a run is
                                              still what the config and the data ask for
    runio                                     a run's files (metrics, history, resolved config)
    paths, plan, datasets, run_inputs         where every file goes; compute plan; what to fetch for what; what a
                                              run reads (verified data, checked partitions, their digests)
    config, provenance, processes             the validated configuration; digests, code versions and the source
                                              files a process imported; a run's independent pieces in parallel
                                              processes (which carry the run's record of those files)
    data, experiments                         datasets, partitions, the federated format; the experiment-kind
                                              registry and the paper-free accounting kinds
    privacy, files, registry                  accountants; atomic writes; the one name registry
    errors, checkout, seeding, progress       error types; the repository root; seeds; progress lines

The only import that goes up: fedrepro.registry loads the papers' declarations (fedrepro.papers), so that the
shared layers find a paper's kinds, plots, algorithms, partition schemes and models by name without naming it.
"""

__version__ = "0.1.0"
