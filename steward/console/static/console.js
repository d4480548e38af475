// The console's one script: live updates by server-sent events, a model
// call's prompt shown in place, and answers (approve, deny) posted in
// place. Every piece of HTML it inserts comes from the server, which
// escapes what the log holds; text it shows is set as text.
"use strict";

function refresh() {
  document.querySelectorAll("[data-fragment]").forEach(function (section) {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", section.dataset.fragment);
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) return;
        var picked = new Set();  // the rows ticked for a batch cancel stay ticked
        section.querySelectorAll("input.pick:checked").forEach(function (box) { picked.add(box.value); });
        var open = new Set();
        section.querySelectorAll("details[open]").forEach(function (d, i) {
          open.add(d.closest("[data-version]") ? d.closest("[data-version]").dataset.version : "#" + i);
        });
        section.innerHTML = html;
        section.querySelectorAll("[data-version] details").forEach(function (d) {
          if (open.has(d.closest("[data-version]").dataset.version)) d.open = true;
        });
        section.querySelectorAll("input.pick").forEach(function (box) {
          if (picked.has(box.value)) box.checked = true;
        });
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      });
  });
}

function live() {
  if (!("live" in document.body.dataset) || !window.EventSource) return;
  var stream = document.body.dataset.live;
  var state = document.getElementById("live-state");
  var source = new EventSource("/live" + (stream ? "?stream=" + encodeURIComponent(stream) : ""));
  var timer = null;
  source.onopen = function () { state.textContent = "live"; document.body.dataset.liveOpen = "1"; };
  source.onerror = function () { state.textContent = "reconnecting…"; };
  source.addEventListener("record", function () {
    if (timer !== null) return;
    timer = setTimeout(function () { timer = null; refresh(); }, 250);
  });
}

document.addEventListener("click", function (e) {
  var link = e.target.closest("a.prompt-link");
  if (!link) return;
  e.preventDefault();
  var slot = link.nextElementSibling;
  fetch(link.href, { credentials: "same-origin" })
    .then(function (r) { return r.text(); })
    .then(function (html) { slot.innerHTML = html; });
});

// An answer to what an actor waits on (approve, deny) is posted in place:
// the page stays, says what was recorded, and follows the actor live.
document.addEventListener("submit", function (e) {
  var form = e.target.closest("form.answer-inline");
  if (!form) return;
  e.preventDefault();
  form.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
  fetch(form.action, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(new FormData(form)),
  }).then(function (r) {
    if (r.ok) return new URL(r.url).searchParams.get("said") || "";
    return r.text().then(function (html) {
      var problem = new DOMParser().parseFromString(html, "text/html").getElementById("problem");
      return problem ? problem.textContent : "refused (" + r.status + ")";
    });
  }).catch(function () {
    return "the console could not be reached: reload the page to see what was recorded";
  }).then(function (said) {
    var shown = document.getElementById("said");
    if (!shown) {
      shown = document.createElement("p");
      shown.id = "said";
      shown.className = "said";
      document.querySelector("main h1").after(shown);
    }
    shown.textContent = said;
    refresh();
  });
});

live();
