"""The run side of the operator tree (FAST plan kind ``tree``, ``workers.ddl.tree``): one module per
operator rule. ``scan``: each table occurrence's rows at the old and new versions and its change rows;
``inner_join``: the linear block (inner join, filter, projection) by its delta rule; ``top``: the
top of the tree, the block's signed rows merged into the MV (projection) or aggregated."""
