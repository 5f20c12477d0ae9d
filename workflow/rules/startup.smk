# What an invocation does before its first job, in two halves (mbc.core.integrity; the
# outdir lock, mbc.core.outdir_hold):
#
# - first, while another invocation holds the outdir, it stops in one line (a dry run goes on
#   and says so): that one's jobs change the files this one would plan from;
# - while the Snakefile is parsed, it only reads: every run's chain of files is checked
#   (`scan`), the jobs of the broken links are forced (so that Snakemake runs `onstart`
#   even under up-to-date tables), and the banner says what is about to happen, untimed.
#   A dry run (-n: Snakemake's own flag) lists what the repair would do; `-n`, `--lint`
#   and `--list-changes` change nothing and time nothing;
# - in `onstart`, which Snakemake runs only when it runs jobs: the outdir is held (one
#   invocation at a time) and checked writable, the repair moves damage aside and deletes
#   what derives from it, and, if it did, Snakemake starts again on the same command line
#   (once) so that its DAG is planned from the repaired files: a file moved aside under an
#   up-to-date table would otherwise not be rebuilt. Then the banner's timed lines.
import mbc.core.integrity
import mbc.core.outdir_hold
import mbc.planning.banner
import mbc.core.runlog
import mbc.stored_runs

if MAIN_PROCESS:
    # another invocation holds the outdir: stop before planning from files it is changing
    # (its jobs replace and delete outputs while this one would read them); a dry run only
    # reads, so it goes on and says so
    if mbc.core.outdir_hold.held_elsewhere(OUT):
        if not workflow.output_settings.dryrun:
            sys.exit(mbc.core.outdir_hold.busy_line(OUT))
        print(
            f"mbc: another snakemake is running on {OUT}/: this dry run reads files it may "
            "be changing",
            file=sys.stderr,
        )
    # the run store (mbc.stored_runs): the stored runs that the outdir lacks come back before
    # anything is checked or planned, so that none of them trains and none of their
    # diagnostics reruns; a dry run only counts them
    _STORE = mbc.stored_runs.restore(CFG, dry_run=workflow.output_settings.dryrun)
    for line in _STORE.lines(dry_run=workflow.output_settings.dryrun):
        print(line, file=sys.stderr)
    _RUNS = [
        mbc.core.integrity.RunFiles(
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
    _FINDINGS = mbc.core.integrity.scan(
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
    _ALTERED = mbc.core.integrity.altered_tables(
        OUT,
        skip=_SKIP,
        rebuilt=_AGGREGATES,
        built=_TABLES_BUILT,
        built_under=_BUILT_UNDER,
        # the stacked tables against the runs they stack now (`only=` changed since)
        inputs_of={
            Path(L.table("tau")): [L.summary(r) for r in SPECS],
            **{Path(L.table(t)): files for t, files in TABLES.items()},
        },
    )
    _UNVERIFIED = mbc.core.integrity.unverified_tables({Path(OUT)}, _TABLES_BUILT)
    # jobs for the broken links, forced, so that Snakemake runs `onstart` (the repair) even
    # where the tables above them look up to date; once repaired, it plans again
    mbc.core.integrity.force_when_planned(
        workflow,
        mbc.core.integrity.first_broken_outputs(_FINDINGS, _RUNS)
        | {p for p in _UNVERIFIED if p in _TABLES_BUILT}
        | {p for p, _ in _ALTERED if p in _TABLES_BUILT},
    )
    if workflow.output_settings.dryrun:
        for line in mbc.core.integrity.move_aside(_ALTERED, dry_run=True):
            print(f"mbc: repair: {line}", file=sys.stderr)
        for line in mbc.core.integrity.repair(
            _FINDINGS, _RUNS, _AGGREGATES, dry_run=True, built=_TABLES_BUILT
        ):
            print(f"mbc: repair: {line}", file=sys.stderr)
    # a killed run's Snakemake lock (no invocation holds the outdir): Snakemake refuses
    # to start; say which outdir and how to clear it
    if not mbc.core.outdir_hold.outdir_in_use(OUT) and mbc.core.outdir_hold.stale_lock(
        ".snakemake/locks", OUT
    ):
        print(
            f"mbc: {OUT}/ has a stale Snakemake lock (a run killed with kill -9): run this "
            "command once with --unlock added, then again without it",
            file=sys.stderr,
        )
    # What this invocation is about to do (also under -n). Untimed: the steps/s and the
    # wall time come in `onstart`. A run whose resume state the repair will move aside
    # counts as to train.
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
            or mbc.core.runlog.finished(mbc.core.runlog.read_log(L.run(r).log))
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
    # an outdir nothing can be written to (read-only, not a directory): one line
    if why := mbc.core.artifacts.unwritable(OUT):
        sys.exit(f"mbc: outdir '{OUT}' cannot be written to: {why}")
    # one invocation per outdir, whatever path reached it: a second one would rerun the
    # jobs the first is running
    if not mbc.core.outdir_hold.hold_outdir(OUT):
        sys.exit(mbc.core.outdir_hold.busy_line(OUT))
    for line in mbc.core.integrity.move_aside(_ALTERED):
        print(f"mbc: repair: {line}", file=sys.stderr)
    for line in mbc.core.integrity.repair(
        _FINDINGS, _RUNS, _AGGREGATES, built=_TABLES_BUILT
    ):
        print(f"mbc: repair: {line}", file=sys.stderr)
    if (_FINDINGS or _ALTERED or _UNVERIFIED) and not os.environ.get(
        mbc.core.integrity.REPLANNED
    ):
        print("mbc: repair: done; planning the jobs again", file=sys.stderr)
        mbc.core.integrity.replan(workflow)
    for line in mbc.planning.banner.timing_lines(
        CFG,
        cores=workflow.resource_settings.cores,
        executor=_executor,
        retrain={f.run_id for f in _FINDINGS if f.retrain},
        deadline=CFG.raw.get("deadline") or None,
    ):
        print(line, file=sys.stderr)
