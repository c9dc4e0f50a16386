"""The token axis of a timeline picture: each hybrid hit whose claim missed the joint
KV + state boundary, drawn as the prompt, the KV hit, the state images, the boundary and
the claim (matplotlib, imported by the caller)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvfault.faults.report.timeline.model import HybridClaim, short_op
from kvfault.faults.report.timeline.notes import _C

if TYPE_CHECKING:
    from matplotlib.axes import Axes  # typed as Any: matplotlib is not followed


def _draw_claims(ax: Axes, claims: list[HybridClaim]) -> None:
    """Hybrid hits on a token axis: the prompt, the KV hit, the state images, the joint
    boundary and the claim, one row per hit; a claim short of the boundary shows the
    tokens it loses."""
    end = max(c.prompt_len for c in claims)
    for y, c in enumerate(claims):
        ok = c.claim == c.joint
        color = _C["claim_ok"] if ok else _C["claim_short"]
        ax.barh(y, c.prompt_len, height=0.7, color="#eeeeee", zorder=1, gid="kv:prompt")
        ax.barh(y, c.kv_hit, height=0.55, color=_C["kv_hit"], zorder=2, gid="kv:KV hit")
        ax.plot(c.states, [y] * len(c.states), ls="", marker="|", ms=12, mew=2,
                color=_C["state_image"], zorder=4, gid="kv:state images")  # fmt: skip
        ax.barh(y, c.claim, height=0.28, color=color, zorder=3,
                gid="kv:claim at the boundary" if ok else "kv:claim off the boundary")  # fmt: skip
        if c.claim < c.joint:
            ax.barh(y, c.joint - c.claim, left=c.claim, height=0.28, color="white",
                    edgecolor=_C["claim_short"], hatch="////", zorder=3)  # fmt: skip
        ax.plot([c.joint] * 2, [y - 0.45, y + 0.45], color="black", ls="--", lw=1.5, zorder=5,
                gid="kv:joint boundary")  # fmt: skip
        if y == 0 or c.joint != claims[y - 1].joint:
            ax.annotate(
                f"joint boundary {c.joint}",
                (c.joint, y - 0.45),
                xytext=(-3, 1),
                textcoords="offset points",
                fontsize=7.5,
                ha="right",
                va="bottom",
                zorder=6,
            )
        verdict = "= the boundary" if ok else f"loses {c.joint - c.claim} tokens"
        if c.claim > c.joint:
            verdict = f"{c.claim - c.joint} tokens past the boundary"
        ax.text(
            c.claim / 2,
            y,
            f"{c.label} claims {c.claim} of {c.prompt_len}: {verdict}",
            fontsize=8,
            fontweight="bold",
            color="white",
            ha="center",
            va="center",
            zorder=6,
            bbox={"boxstyle": "round,pad=0.15", "fc": color, "ec": "none"},
            gid="kv:on-bar",  # the claim's own label, on it
        )
    ax.set_ylim(len(claims) - 0.4, -0.8)
    ax.set_yticks(range(len(claims)))
    ax.set_yticklabels([f"{c.label} {short_op(c.req_id)}" for c in claims], fontsize=7)
    ax.tick_params(axis="y", length=0)
    chunk = claims[0].chunk
    if chunk:
        ax.set_xticks(range(0, end + 1, chunk))
    ax.set_xlim(0, end * 1.02)
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("tokens" + (f" (grid: {chunk}-token chunks)" if chunk else ""), fontsize=9)
    ax.set_title(
        "hybrid hits on a token axis: light blue = KV hit, | = state images, "
        "bar = claimed, dashed = joint KV + state boundary",
        loc="left",
        fontsize=9,
    )
