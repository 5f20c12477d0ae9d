from mbc.figures import render
from mbc.logging import logged

with logged(snakemake.log[0]):
    render(
        snakemake.wildcards.figure,
        dict(snakemake.input.items()),
        snakemake.output.pdf,
        snakemake.output.png,
    )
