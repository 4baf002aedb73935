// Filter by paper / artifact / status, open a row's group when its anchor is followed, show a table cell's row on
// hover. Everything the page shows is in the HTML; this only hides, opens and copies.
(function () {
  const all = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const paperSel = document.getElementById("f-paper"), artSel = document.getElementById("f-artifact");
  const shown = document.getElementById("f-shown");
  let status = "";

  function apply() {
    const paper = paperSel.value;
    for (const o of artSel.options) o.hidden = !!(o.value && paper && o.dataset.paper !== paper);
    if (artSel.selectedOptions[0].hidden) artSel.value = "";
    const [artPaper, artifact] = artSel.value ? artSel.value.split("\u001f") : ["", ""];
    let rows = 0;
    for (const sec of all("section.paper")) {
      const on = (!paper || sec.dataset.paper === paper) && (!artPaper || sec.dataset.paper === artPaper);
      sec.hidden = !on;
      for (const blk of all(".blk", sec)) {
        let visible = on && (!artifact || JSON.parse(blk.dataset.artifacts).includes(artifact));
        let any = false;
        for (const el of all("[data-status]", blk)) {
          const match = !status || el.dataset.status === status;
          if (el.classList.contains("part")) el.classList.toggle("dim", !match); else el.hidden = !match;
          any = any || match;
        }
        if (status && !any) visible = false;
        for (const list of all(".rowlist", blk)) list.hidden = !list.querySelector("li:not([hidden])");
        blk.hidden = !visible;
        if (visible && (status || artifact) && blk.tagName === "DETAILS") blk.open = true;
        if (visible) rows += all("tr.row", blk).filter((r) => !r.hidden).length;
      }
    }
    for (const b of all("[data-filter-status]")) b.classList.toggle("on", b.dataset.filterStatus === status);
    shown.textContent = `${rows} rows shown`;
  }

  document.addEventListener("click", (e) => {
    const b = e.target.closest("[data-filter-status]");
    if (b) {
      e.preventDefault();  // a badge inside a group's summary filters, it does not fold the group
      status = b.dataset.filterStatus === status ? "" : b.dataset.filterStatus;
      if (b.dataset.paper) paperSel.value = b.dataset.paper;
      apply();
      return;
    }
    const row = e.target.closest("tr.row");
    if (row && !e.target.closest("a")) {
      row.classList.toggle("open");
      for (const ref of all("a.ref", row)) ref.textContent = shared(ref);  // an opened row spells its shared notes out
    }
  });
  paperSel.addEventListener("change", apply);
  artSel.addEventListener("change", apply);
  document.getElementById("f-clear").addEventListener("click", () => {
    status = ""; paperSel.value = ""; artSel.value = ""; apply();
  });

  function reveal() {
    const id = decodeURIComponent(location.hash.slice(1));
    const el = id && document.getElementById(id);
    if (!el) return;
    if (el.closest("[hidden]")) { status = ""; paperSel.value = ""; artSel.value = ""; apply(); }
    for (let d = el.closest("details"); d; d = d.parentElement.closest("details")) d.open = true;
    all(".hit").forEach((x) => x.classList.remove("hit"));
    el.classList.add("hit");
    el.scrollIntoView({block: "center"});
  }
  window.addEventListener("hashchange", reveal);

  // a note written once per paper (a.ref links to it): its text
  const shared = (ref) => (document.getElementById(ref.hash.slice(1)) || ref).textContent;
  const cellText = (td) => {
    const copy = td.cloneNode(true);
    for (const ref of all("a.ref", copy)) ref.replaceWith(shared(ref));
    return copy.textContent;
  };

  const tip = document.getElementById("tip");
  for (const part of all("a.part[title]")) part.removeAttribute("title");   // the tip below replaces the title
  document.addEventListener("mouseover", (e) => {
    const cell = e.target.closest("a.part");
    const row = cell && document.getElementById(cell.dataset.row);
    if (!row) { tip.hidden = true; return; }
    tip.replaceChildren();
    const head = all("th", row.closest("table").rows[0]);
    all("td", row).forEach((td, i) => {
      const text = cellText(td);
      if (!text.trim()) return;
      const line = document.createElement("div"), label = document.createElement("b");
      label.textContent = head[i].textContent + ": ";
      line.append(label, text);
      tip.append(line);
    });
    tip.hidden = false;
    const r = cell.getBoundingClientRect();
    tip.style.left = Math.min(r.right + 8, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = Math.max(8, Math.min(r.top, window.innerHeight - tip.offsetHeight - 8)) + "px";
  });

  apply();
  reveal();
})();
