"""What a browser test measures to say that a page reads whole: no table wider than its place on the
page (a column past the edge), no short table that scrolls, no tile whose value or label is cut.

Measured in the page, as chromium laid it out: a grid's scroller is wider or taller than its box
when a column or a row is out of sight; a tile's text is cut (with an ellipsis) when its element is
narrower than the text it holds.
"""

from __future__ import annotations

READABLE_VIEWPORT = {"width": 1280, "height": 800}  # a laptop: the narrowest window the tables are fitted to

CLIPPED_JS = """() => {
  const out = [];
  const named = (el) => (el.innerText || '').trim().slice(0, 60).replace(/\\s+/g, ' ');
  const heads = (grid) => [...grid.querySelectorAll('th')].slice(0, 4).map((th) => th.textContent).join(', ');
  document.querySelectorAll('[data-testid=stDataFrame]').forEach((grid, i) => {
    const box = grid.querySelector('.dvn-scroller');
    if (box === null) return;
    const rows = parseInt(grid.querySelector('[aria-rowcount]')?.getAttribute('aria-rowcount') || '0');
    if (box.scrollWidth > box.clientWidth + 1)
      out.push(`table ${i} (${heads(grid)}): ${box.scrollWidth} px of columns in ${box.clientWidth} px`);
    if (rows > 0 && rows <= 31 && box.scrollHeight > box.clientHeight + 1)
      out.push(`table ${i} (${heads(grid)}): ${rows - 1} rows scroll (${box.scrollHeight} in ${box.clientHeight} px)`);
  });
  document.querySelectorAll('[data-testid=stMetricValue], [data-testid=stMetricLabel] p').forEach((el) => {
    const text = el.querySelector('div') || el;
    if (text.scrollWidth > text.clientWidth + 1)
      out.push(`tile "${named(el)}": ${text.scrollWidth} px of text in ${text.clientWidth} px`);
  });
  return out;
}"""


def clipped(page) -> list[str]:
    """Each table, row set or tile on the page that does not show whole, in one line each."""
    return page.evaluate(CLIPPED_JS)


def settled(page, timeout_ms: int = 90_000) -> None:
    """Until the page has rendered: no skeleton left, the script not running, visible grids drawn
    (a grid in a tab not shown is drawn only when its tab is)."""
    page.wait_for_function(
        """() => document.querySelectorAll('[data-testid=stSkeleton]').length === 0
                 && !document.querySelector('[data-testid=stStatusWidget] [data-testid=stStatusWidgetRunningIcon]')
                 && [...document.querySelectorAll('[data-testid=stDataFrame]')].every(
                      (g) => g.offsetParent === null || g.querySelector('.dvn-scroller') !== null)""",
        timeout=timeout_ms)
    page.wait_for_timeout(1500)
