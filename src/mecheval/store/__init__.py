"""The results store: the on-disk files of runs (`runs`: config.yaml, summary.json, verdict.json, the metrics
log, readout tables; `identity`: run.json, what a sweep records of a run when it makes it) and of studies
(`studies`: study.json, sweep.yaml), each read once per process (`files.read_once`)."""
