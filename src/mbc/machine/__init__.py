"""The machine the pipeline runs on, read and timed: `mbc.machine.probe`."""
