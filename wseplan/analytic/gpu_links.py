"""Effective per-GPU link parameters of a GPU type under a calibration: the scale-up network (NVSwitch or a full mesh),
the scale-out network and HBM, and the tensor-parallel all-reduce on them (:class:`Links`)."""
from __future__ import annotations

from ..calibration_data import GpuCalibration
from . import elementwise as X
from .collectives import allreduce_time_s, hierarchical_allreduce_time_s


class Links:
    """Effective per-GPU link parameters of one GPU type under a calibration [bytes/s, s].

    Scale-up through a switch (NVSwitch) gives every GPU its whole bandwidth ``B`` to any peer and in any group. In a
    full mesh (``scale_up_topology: full-mesh``: AMD's 8-GPU Infinity Fabric platforms, one link ``b`` to each peer,
    ``B = 7 b``; AMD CDNA 3 white paper, 2023) a collective among ``g`` GPUs runs at ``(g - 1) b`` per GPU
    (:meth:`group_bw`) and a point-to-point send (pipeline hop, context-parallel ring) at ``b`` (``nvlink_bw``)."""

    def __init__(self, gpu, cal: GpuCalibration):
        self.mesh = getattr(gpu, "scale_up_topology", "switch") == "full-mesh"
        self.switch_bw = gpu.scale_up_bandwidth_bytes_per_s.si * cal.nvlink_frac
        self.link_bw = gpu.scale_up_link_bandwidth_bytes_per_s.si * cal.nvlink_frac if self.mesh else self.switch_bw
        self.nvlink_bw = self.link_bw
        self.net_bw = gpu.scale_out_bandwidth_bytes_per_s.si * cal.network_frac
        self.nvlink_lat = cal.nvlink_latency_s
        self.net_lat = cal.network_latency_s
        self.domain = float(gpu.scale_up_domain_gpus.si)
        self.per_node = float(gpu.gpus_per_node.si)
        self.hbm_bw = gpu.hbm_bandwidth_bytes_per_s.si * cal.hbm_frac
        self.allreduce_latency = cal.allreduce_latency_s

    def group_bw(self, num_gpus):
        """Scale-up bandwidth per GPU [bytes/s] of a collective among ``num_gpus`` GPUs of one domain (arrays
        broadcast): the switch's whole bandwidth, or in a full mesh the links to the group's other members,
        ``(min(g, domain) - 1) b`` (at least one link)."""
        if not self.mesh:
            return self.switch_bw
        g = X.minimum(X.asfloat(num_gpus), self.domain)
        return self.link_bw * X.maximum(g - 1.0, 1.0)

    def tp_allreduce(self, message_bytes, tp):
        tp = X.asfloat(tp)
        inside = tp <= self.domain
        bw_in = self.group_bw(tp)
        bw_node = self.group_bw(self.domain)  # across domains: the groups' members in one domain fill it
        if self.allreduce_latency > 0:  # the engine's one-shot kernel: one latency, the ring's bytes
            t_in = X.where(tp > 1, self.allreduce_latency + 2.0 * (tp - 1.0) / tp * X.asfloat(message_bytes) / bw_in,
                           0.0)
            if X.all_true(inside):  # every group inside the scale-up domain (the across-nodes form would be discarded)
                return t_in
            t_out = hierarchical_allreduce_time_s(message_bytes=message_bytes, num_ranks=tp, ranks_per_node=self.domain,
                                                  intra_bandwidth_bytes_per_s=bw_node,
                                                  intra_latency_s=self.nvlink_lat, inter_bandwidth_bytes_per_s=self.net_bw,
                                                  inter_latency_s=self.net_lat, algorithm="tree")
            return X.where(inside, t_in, t_out)
        t_in = allreduce_time_s(message_bytes=message_bytes, num_ranks=tp, link_bandwidth_bytes_per_s=bw_in,
                                link_latency_s=self.nvlink_lat, algorithm="tree")
        if X.all_true(inside):
            return t_in
        t_out = hierarchical_allreduce_time_s(message_bytes=message_bytes, num_ranks=tp, ranks_per_node=self.domain,
                                              intra_bandwidth_bytes_per_s=bw_node, intra_latency_s=self.nvlink_lat,
                                              inter_bandwidth_bytes_per_s=self.net_bw, inter_latency_s=self.net_lat,
                                              algorithm="tree")
        return X.where(inside, t_in, t_out)
