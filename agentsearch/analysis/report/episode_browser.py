"""The episode browser: sampled training episodes, token by token, as the loss saw them.

Episodes come from each run's ``episodes.jsonl`` (``agentsearch.trainer.episode_log``): the
stored token ids and action mask of rows the update took. The page draws every token as a
``<span class="tok pol">`` (a policy token: the mask is 1, the loss trains on it) or a
``<span class="tok env">`` (prompt and environment tokens: mask 0), in the stored order, grouped
into turns where the mask changes; nothing is re-tokenised. Each episode shows its reward and
advantage, and a replayed one the drift and headroom the gate measured when it was replayed.
A report holds at most ``EPISODES_TOTAL`` episodes, spread over runs and steps.
"""

from __future__ import annotations

import json
from html import escape

from agentsearch.analysis.report.report_parts import Context, Section, legend, note
from agentsearch.analysis.report.report_runs import pick_episodes

__all__ = ["episodes_section", "EPISODES_TOTAL", "EPISODE_SCRIPT"]

EPISODES_TOTAL = 160
"""Episodes in one report, over all its runs (each run gets an equal share, 4 to 24)."""


def episodes_section(ctx: Context) -> Section:
    share = max(4, min(24, EPISODES_TOTAL // max(len(ctx.runs), 1)))
    episodes = [ep for r in ctx.runs for ep in pick_episodes(r, share)][:EPISODES_TOTAL]
    if not episodes:
        return Section("episodes", "Episodes", note(
            "no episodes.jsonl in these runs (runs made before it existed, or by the OpenRLHF "
            "engine): nothing to browse"))
    runs = list(dict.fromkeys(ep["run"] for ep in episodes))
    options = "".join(f'<option value="{i}">{escape(r)}</option>' for i, r in enumerate(runs))
    body = (legend([("policy token (action mask 1: the loss trains on it)", "#cfe3ff"),
                    ("prompt or environment token (mask 0)", "#eeeeee")])
            + '<div class="ep-controls"><label>run <select id="ep-run">' + options
            + '</select></label> <label>episode <select id="ep-pick"></select></label></div>'
            '<div id="ep-head"></div><div id="ep-view" class="ep-view"></div>'
            f'<script type="application/json" id="episodes-data">{_json(episodes, runs)}</script>'
            f"<p class=\"note\">{len(episodes)} episodes from {len(runs)} run(s); per step the "
            "trainer keeps the highest- and lowest-advantage rows of one fresh and one replayed "
            "group. Hover a token for its id.</p>")
    return Section("episodes", "Episodes, as the loss saw them", body)


def _json(episodes: list[dict], runs: list[str]) -> str:
    keep = ("step", "source", "group", "row", "born_step", "reward", "advantage", "correct",
            "drift", "headroom", "token_ids", "tokens", "action_mask", "cut")
    rows = [{"run_index": runs.index(ep["run"]), **{k: ep[k] for k in keep if k in ep}}
            for ep in episodes]
    return json.dumps({"runs": runs, "episodes": rows}, separators=(",", ":"),
                      ensure_ascii=False).replace("</", "<\\/")


EPISODE_SCRIPT = r"""
(function () {
  const holder = document.getElementById("episodes-data");
  if (!holder) return;
  const data = JSON.parse(holder.textContent);
  const runSel = document.getElementById("ep-run"), pick = document.getElementById("ep-pick");
  const head = document.getElementById("ep-head"), view = document.getElementById("ep-view");
  function num(v) { return v === undefined || v === null ? "-" : fmt(v); }
  function fillPicks() {
    const r = Number(runSel.value);
    pick.innerHTML = "";
    data.episodes.forEach(function (ep, i) {
      if (ep.run_index !== r) return;
      const o = document.createElement("option");
      o.value = String(i);
      o.textContent = "step " + ep.step + " \u00b7 " + ep.source + " \u00b7 reward " +
        num(ep.reward) + " \u00b7 advantage " + num(ep.advantage);
      pick.appendChild(o);
    });
    show();
  }
  function show() {
    const ep = data.episodes[Number(pick.value)];
    view.innerHTML = "";
    if (!ep) { head.textContent = ""; return; }
    view.dataset.episode = pick.value;
    let facts = data.runs[ep.run_index] + ", step " + ep.step + ": " + ep.source + " group " +
      ep.group + ", row " + ep.row + " (generated at step " + ep.born_step + ") \u00b7 reward " +
      num(ep.reward) + " \u00b7 advantage " + num(ep.advantage);
    if (ep.correct !== undefined) facts += " \u00b7 correct " + ep.correct;
    if (ep.drift !== undefined) facts += " \u00b7 drift " + num(ep.drift) + " \u00b7 headroom " +
      num(ep.headroom);
    head.textContent = facts;
    let turn = null, last = null, policyTurns = 0;
    for (let i = 0; i < ep.action_mask.length; i++) {
      const pol = ep.action_mask[i] === "1";
      if (pol !== last) {
        turn = document.createElement("div");
        turn.className = "turn " + (pol ? "pol" : "env");
        const label = document.createElement("div");
        label.className = "turn-label";
        label.textContent = pol ? "policy turn " + (++policyTurns) :
          (i === 0 ? "prompt" : "environment");
        turn.appendChild(label);
        view.appendChild(turn);
        last = pol;
      }
      const s = document.createElement("span");
      s.className = "tok " + (pol ? "pol" : "env");
      s.textContent = ep.tokens ? ep.tokens[i] : String(ep.token_ids[i]);
      s.title = "token " + i + ", id " + ep.token_ids[i];
      turn.appendChild(s);
    }
    if (ep.cut) {
      const more = document.createElement("p");
      more.className = "note";
      more.textContent = ep.cut + " more tokens not shown";
      view.appendChild(more);
    }
  }
  runSel.addEventListener("change", fillPicks);
  pick.addEventListener("change", show);
  fillPicks();
})();
"""
"""Draws the selected episode (module doc); ``fmt`` comes from the page's script."""
