# Shared helpers: the validated config, run lookup and output paths.
import mbc.config

# Validate once at start-up (JSON schema + semantic checks); a bad value stops the
# workflow here, before any job runs, with the key and value in the message.
CFG = mbc.config.load(config, overrides=workflow.config_settings.overwrite_config)
OUT = CFG.outdir
SPECS = CFG.specs  # run_id -> RunSpec
DATASETS = {s.dataset_id: s for s in SPECS.values()}  # dataset_id -> a spec using it


wildcard_constraints:
    run_id="[A-Za-z0-9_.+-]+",
    dataset_id="[A-Za-z0-9_.+-]+",


def run_path(run_id, name):
    return f"{OUT}/runs/{run_id}/{name}"


def all_run_ids():
    return list(SPECS)


ALL_TARGETS = [f"{OUT}/tau.csv"]
