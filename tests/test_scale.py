

def test_the_sweep_stops_at_a_clusters_limit_with_a_note(catalog):
    """audit32c F6: `--max-systems 256` on wse2 (a CS-2 cluster holds at most 192) failed the whole sweep, its GPU rows
    too, naming num_systems; a batch smaller than the counts dropped rows silently. The rows stop where the cluster
    (or the batch) does, and a note says why."""
    from wseplan.scale import scaling_frame

    df = scaling_frame("gpt3-175b", ["wse2"], catalog, global_batch=4096, context=2048, max_systems=256)
    assert int(df["num_systems"].max()) == 128
    assert df.attrs["notes"] == ["wse2 stops at 128 systems: the largest wse2 cluster holds 192 systems"]
    small = scaling_frame("gpt3-175b", ["wse3"], catalog, global_batch=48, context=2048, max_systems=256)
    assert int(small["num_systems"].max()) == 32 and "global batch of 48" in small.attrs["notes"][0]
