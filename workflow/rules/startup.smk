# What an invocation does before Snakemake plans its first job, all while the Snakefile is
# parsed, in the main process (mbc.workflow.integrity; the outdir lock, mbc.workflow.outdir_hold;
# which invocation runs jobs, mbc.workflow.invocation):
#
# - an invocation that runs jobs checks that the outdir can be written and holds it (one
#   invocation at a time, for the life of this process), or stops in one line; any other
#   invocation stops in one line while another holds it (its jobs change the files this one
#   would read), except a dry run, which goes on and says so;
# - every run's chain of files is checked (`scan`), and the outdir's tables against their
#   checksums and settings; an invocation that runs jobs then repairs: damage is moved aside
#   and what derives from it deleted, so that Snakemake, planning its DAG from the repaired
#   outdir afterwards, rebuilds all of it in this same process. A dry run (-n, Snakemake's
#   own setting) lists what the repair would do; a dry run, `--lint`, `--summary`,
#   `--list-changes` and the other inspection commands change nothing and time nothing;
# - the banner says what is about to happen, untimed; in `onstart` (Snakemake runs it only
#   when it runs jobs) come the checks that need the executor and the banner's timed lines.
import mbc.workflow.integrity
import mbc.workflow.invocation
import mbc.workflow.outdir_hold
import mbc.planning.banner
import mbc.core.journal
import mbc.stored_runs

if MAIN_PROCESS:
    _DRY_RUN = workflow.output_settings.dryrun  # -n/--dry-run, or dryrun: in a profile
    # True: the invocation runs jobs (repairs); False: a dry run or an inspection command
    # (changes nothing); None: not Snakemake's command line (changes nothing, says so)
    _RUNS_JOBS = mbc.workflow.invocation.runs_jobs(workflow)
    if _RUNS_JOBS:
        # checked writable, then held: before the store, the check and the repair touch it
        mbc.workflow.outdir_hold.take_outdir(OUT)
    elif mbc.workflow.outdir_hold.held_elsewhere(OUT):
        # another invocation holds the outdir: stop before planning from files it is
        # changing; a dry run only reads, so it goes on and says so
        if not _DRY_RUN:
            sys.exit(mbc.workflow.outdir_hold.busy_line(OUT))
        print(
            f"mbc: another snakemake is running on {OUT}/: this dry run reads files it may "
            "be changing",
            file=sys.stderr,
        )
    # the run store (mbc.stored_runs): the stored runs that the outdir lacks come back before
    # anything is checked or planned, so that none of them trains and none of their
    # diagnostics reruns; an invocation that runs no jobs only counts them
    _STORE = mbc.stored_runs.restore(CFG, dry_run=not _RUNS_JOBS)
    for line in _STORE.lines(dry_run=not _RUNS_JOBS):
        print(line, file=sys.stderr)
    _RUNS = [
        mbc.workflow.integrity.RunFiles(
            run_id=r,
            dataset=Path(L.dataset(s.dataset_id)),
            train=[Path(L.metrics(r)), Path(L.checkpoints(r))],
            summary=Path(L.summary(r)),
            pack=Path(L.pack(PACK_OF[r])) if r in PACK_OF else None,
            diagnostics=[Path(p) for p in RUN_DIAGNOSTICS[r]],
        )
        for r, s in SPECS.items()
    ]
    _AGGREGATES = [Path(L.table(t)) for t in ("tau", *TABLES)]
    # every derived file -> the config id its rule reads now (its sidecar recorded the one
    # it was built under): a table built under other settings is rebuilt, whatever spelling
    # of the outdir or state of .snakemake/ reached it
    _BUILT_UNDER = {
        **{
            Path(out): CONFIG_ID[name]
            for name in (
                "plateau_sensitivity",
                "fits",
                "statistics",
                "hypotheses",
                "robustness",
                "scorecard",
                "tex",
            )
            for out in getattr(rules, name).output
        },
        **{
            Path(L.figure(f, ext)): CFG.figure_config_id(f)
            for f in FIGURES
            for ext in FIGURE_FILES
        },
        **{Path(L.summary(r)): CONFIG_ID["summarize_run"] for r in SPECS},
        **{
            Path(L.diagnostic(kind, r, sfx)): CONFIG_ID[kind]
            for kind, sfx in DIAG_TABLES.values()
            for r in DIAGNOSED[kind]
        },
    }
    _FINDINGS = mbc.workflow.integrity.scan(
        _RUNS,
        _AGGREGATES,
        verify_snapshots=CFG.raw.get("verify") == "full",
        built_under=_BUILT_UNDER,
    )
    # the outdir's tables not what their checksums recorded (the aggregated tables go anyway
    # where a run's chain is broken: not said twice; one missing as another's input is
    # rebuilt, and that table after it: no finding)
    _SKIP = _AGGREGATES if _FINDINGS else ()
    # the files the workflow builds: one without its sidecar is rebuilt, a user's own left;
    # one deleted takes the tables built from it along (superseded, rebuilt after it)
    _TABLES_BUILT = {Path(t) for t in ALL_TARGETS}
    # the stacked tables against the runs they stack now (`only=` changed since)
    _INPUTS_OF = {
        Path(L.table("tau")): [L.summary(r) for r in SPECS],
        **{Path(L.table(t)): files for t, files in TABLES.items()},
    }
    _ALTERED = mbc.workflow.integrity.altered_tables(
        OUT,
        skip=_SKIP,
        rebuilt=_AGGREGATES,
        built=_TABLES_BUILT,
        built_under=_BUILT_UNDER,
        inputs_of=_INPUTS_OF,
    )
    _UNVERIFIED = mbc.workflow.integrity.unverified_tables({Path(OUT)}, _TABLES_BUILT)
    # the repair, before Snakemake plans: every file it moves aside or deletes is missing
    # when the DAG is built, so Snakemake rebuilds it and reruns what derives from it; a
    # dry run lists it, an inspection command neither lists nor changes
    if _RUNS_JOBS or _DRY_RUN:
        for line in mbc.workflow.integrity.repair_all(
            OUT,
            _ALTERED,
            _FINDINGS,
            _RUNS,
            _AGGREGATES,
            _TABLES_BUILT,
            dry_run=not _RUNS_JOBS,
            built_under=_BUILT_UNDER,
            inputs_of=_INPUTS_OF,
        ):
            print(line, file=sys.stderr)
    elif _RUNS_JOBS is None and (_FINDINGS or _ALTERED or _UNVERIFIED):
        print(
            f"mbc: repair: skipped: {OUT}/ has damaged or outdated files, and this is not "
            "Snakemake's command line, which alone says whether jobs run: run snakemake on it",
            file=sys.stderr,
        )
    # a killed run's Snakemake lock (no invocation holds the outdir): Snakemake refuses
    # to start; say which outdir and how to clear it
    if not mbc.workflow.outdir_hold.outdir_in_use(
        OUT
    ) and mbc.workflow.outdir_hold.stale_lock(".snakemake/locks", OUT):
        print(
            f"mbc: {OUT}/ has a stale Snakemake lock (a run killed with kill -9): run this "
            "command once with --unlock added, then again without it",
            file=sys.stderr,
        )
    # What this invocation is about to do (also under -n). Untimed: the steps/s and the
    # wall time come in `onstart`. A run whose resume state the repair moved aside (or would
    # move) counts as to train.
    for line in mbc.planning.banner.banner_lines(
        CFG,
        cores=workflow.resource_settings.cores,
        measure=False,
        dry_run=workflow.output_settings.dryrun,
        retrain={f.run_id for f in _FINDINGS if f.retrain},
        from_store=set(_STORE.restored),
    ):
        print(line, file=sys.stderr)
    # under a deadline, `all` is the chains of the runs that end in time and of those
    # already trained (summaries, diagnostics): the period ends on runs the store can take
    if DEADLINE_S is not None:
        _CHOSEN, _LINES = mbc.planning.deadline.within(
            CFG,
            DEADLINE_S,
            workflow.resource_settings.cores,
            dry_run=workflow.output_settings.dryrun,
            from_store=frozenset(_STORE.restored),
        )
        for line in _LINES:
            print(line, file=sys.stderr)
        TRAIN_PRIORITY.update({r: -rank for rank, r in enumerate(_CHOSEN)})
        ALL_TARGETS[:] = [
            p
            for r in SPECS
            if r in _CHOSEN
            or mbc.core.journal.finished(mbc.core.journal.read_journal(L.run(r).log))
            for p in (L.summary(r), *RUN_DIAGNOSTICS[r])
        ]
    if CFG.raw.get("tensorboard") and not mbc.training.tensorboard_log.available():
        print(mbc.training.tensorboard_log.missing_line(), file=sys.stderr)


onstart:
    _executor = "local" if workflow.local_exec else workflow.executor_plugin.name
    # more threads per job than this machine has, where this machine runs the jobs
    if _executor == "local" and int(CFG.raw["threads"]) > (os.cpu_count() or 1):
        sys.exit(
            f"mbc: config key 'threads' = {CFG.raw['threads']}: more than this machine's "
            f"{os.cpu_count()} cores (threads per training job)"
        )
    for line in mbc.planning.banner.timing_lines(
        CFG,
        cores=workflow.resource_settings.cores,
        executor=_executor,
        retrain={f.run_id for f in _FINDINGS if f.retrain},
        deadline=CFG.raw.get("deadline") or None,
    ):
        print(line, file=sys.stderr)
