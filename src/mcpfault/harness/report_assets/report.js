// report.html's task list and trace waterfall (harness/report_html.py inlines this file).
// Rows come from #task-data; a task's trace is parsed from its #trace-N script only when it is opened.
// No fetch, no import, no timer: nothing here can ask the network for anything.
(function () {
  "use strict";
  // The columns of a task row, as report_html._task_row writes them.
  var F = {
    pos: 0, outcome: 1, profile: 2, agent: 3, session: 4, task: 5, workflow: 6, modes: 7, attempts: 8,
    duplicates: 9, ms: 10, detail: 11, failure: 12, trace: 13, traced: 14, types: 15
  };
  // The fields of a waterfall step, as report_html.Step.compact writes them (marks last).
  var S = { depth: 0, kind: 1, name: 2, start: 3, duration: 4, detail: 5, marks: 6 };
  var COLUMNS = 10;

  var tasks = JSON.parse(document.getElementById("task-data").textContent);
  var body = document.querySelector("#task-table tbody");
  var filters = {};
  ["outcome", "profile", "agent", "fault"].forEach(function (key) {
    filters[key] = document.getElementById("filter-" + key);
    filters[key].addEventListener("change", draw);
  });

  function element(tag, className, text) {
    var made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  function kept(task) {
    return (!filters.outcome.value || task[F.outcome] === filters.outcome.value) &&
      (!filters.profile.value || task[F.profile] === filters.profile.value) &&
      (!filters.agent.value || task[F.agent] === filters.agent.value) &&
      (!filters.fault.value || task[F.types].indexOf(filters.fault.value) >= 0);
  }

  function draw() {
    body.textContent = "";
    var shown = 0;
    tasks.forEach(function (task) {
      if (!kept(task)) return;
      shown++;
      var row = element("tr", "task");
      row.id = "task-" + task[F.pos];
      row.dataset.outcome = task[F.outcome];
      var badge = element("td");
      badge.appendChild(element("span", "badge " + task[F.outcome], task[F.outcome]));
      row.appendChild(badge);
      var cells = [task[F.profile], task[F.agent], task[F.session], task[F.task], task[F.workflow],
        task[F.modes].join(", ") || "-", task[F.attempts], task[F.duplicates], task[F.ms].toFixed(1)];
      var numeric = [false, false, true, true, false, false, true, true, true];
      cells.forEach(function (value, i) { row.appendChild(element("td", numeric[i] ? "n" : "", String(value))); });
      row.addEventListener("click", function () { toggle(row, task); });
      body.appendChild(row);
    });
    document.getElementById("task-count").textContent = shown + " of " + tasks.length + " tasks";
  }

  function isTrace(row) { return row && row.classList && row.classList.contains("trace"); }

  function toggle(row, task) {
    if (isTrace(row.nextSibling)) {
      row.nextSibling.remove();
      row.classList.remove("open");
      return;
    }
    row.classList.add("open");
    var traceRow = element("tr", "trace");
    var cell = element("td");
    cell.colSpan = COLUMNS;
    traceRow.appendChild(cell);
    var summary = "task " + task[F.task] + " " + task[F.workflow] + ": " + task[F.outcome] +
      (task[F.failure] ? " (" + task[F.failure] + ")" : "") + (task[F.detail] ? " · " + task[F.detail] : "") +
      (task[F.trace] ? " · trace " + task[F.trace] : "");
    cell.appendChild(element("div", "summary", summary));
    var data = document.getElementById("trace-" + task[F.pos]);
    if (data) cell.appendChild(waterfall(JSON.parse(data.textContent)));
    else cell.appendChild(element("p", "", "No trace for this task (it ran without spans)."));
    row.parentNode.insertBefore(traceRow, row.nextSibling);
  }

  function waterfall(steps) {
    var box = element("div", "waterfall");
    var end = 1e-9;
    steps.forEach(function (step) { end = Math.max(end, step[S.start] + step[S.duration]); });
    box.appendChild(axis(end));
    steps.forEach(function (step) {
      var marks = step[S.marks];
      var line = element("div", "step " + step[S.kind] + (marks.indexOf("fault") >= 0 ? " fault" : ""));
      var label = element("div", "label");
      label.style.paddingLeft = (step[S.depth] * 16) + "px";
      label.appendChild(element("span", "kind", step[S.kind]));
      label.appendChild(document.createTextNode(step[S.name] + "  " + step[S.duration].toFixed(1) + " ms"));
      marks.forEach(function (mark) { label.appendChild(element("span", "mark " + mark, mark)); });
      if (step[S.detail]) label.appendChild(element("span", "detail", step[S.detail]));
      var track = element("div", "track");
      var bar = element("div", "bar");
      bar.style.left = (100 * step[S.start] / end) + "%";
      bar.style.width = (100 * step[S.duration] / end) + "%";
      bar.title = step[S.name] + ": starts at " + step[S.start].toFixed(1) + " ms, lasts " +
        step[S.duration].toFixed(1) + " ms";
      track.appendChild(bar);
      line.appendChild(label);
      line.appendChild(track);
      box.appendChild(line);
    });
    return box;
  }

  // A scale above the bars: milliseconds since the task started, in quarters of the whole.
  function axis(end) {
    var line = element("div", "step axis");
    line.appendChild(element("div", "label", "span (ms since the task started)"));
    var track = element("div", "track");
    [0, 0.25, 0.5, 0.75, 1].forEach(function (share) {
      var tick = element("span", "tick", (share * end).toFixed(share && end < 10 ? 1 : 0));
      tick.style.left = (100 * share) + "%";
      track.appendChild(tick);
    });
    line.appendChild(track);
    return line;
  }

  function openTask(pos) {
    Object.keys(filters).forEach(function (key) { filters[key].value = ""; });
    draw();
    var row = document.getElementById("task-" + pos);
    if (!row) return;
    var task = tasks.filter(function (t) { return t[F.pos] === pos; })[0];
    if (!isTrace(row.nextSibling)) toggle(row, task);
    row.scrollIntoView();
  }

  document.querySelectorAll("[data-open]").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      openTask(Number(link.dataset.open));
    });
  });
  document.querySelectorAll("[data-filter-outcome]").forEach(function (button) {
    button.addEventListener("click", function () {
      filters.outcome.value = button.dataset.filterOutcome;
      draw();
      document.getElementById("tasks").scrollIntoView();
    });
  });
  draw();
})();
