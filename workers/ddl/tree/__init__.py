"""The operator tree of an MV query (FAST plan kind ``tree``): ``build.plan_tree`` builds it,
``values`` holds its plain values as they travel (what workers read, without sqlglot)."""
