// The metrics dashboard's charts, drawn with the vendored uPlot (static/console/vendor/uplot)
// from the JSON each figure carries (json_script): a time axis with ticks, a y axis with its
// unit, a line and points per combination, a dashed line at each threshold on the metric, and
// the values under the pointer in the legend.
// Without JavaScript (or uPlot) the figure's table stays, folded in a <details> (a day is 288
// rows a chart); with it the table is hidden.
(function () {
  "use strict";

  var PALETTE = ["#1f5fbf", "#c2410c", "#15803d", "#7e22ce"];
  var LIMIT = "#b91c1c";

  // A dashed line across the plot at each threshold, its label above the line's right end.
  function limitLines(limits) {
    return {
      hooks: {
        draw: function (u) {
          var ctx = u.ctx;
          var left = u.bbox.left;
          var right = u.bbox.left + u.bbox.width;
          ctx.save();
          ctx.strokeStyle = LIMIT;
          ctx.fillStyle = LIMIT;
          ctx.lineWidth = 1.5 * devicePixelRatio;
          ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.font = 12 * devicePixelRatio + "px sans-serif";
          ctx.textAlign = "right";
          limits.forEach(function (limit) {
            var y = Math.round(u.valToPos(limit.value, "y", true));
            ctx.beginPath();
            ctx.moveTo(left, y);
            ctx.lineTo(right, y);
            ctx.stroke();
            ctx.fillText(limit.label, right - 4 * devicePixelRatio, y - 4 * devicePixelRatio);
          });
          ctx.restore();
        },
      },
    };
  }

  function format(percent) {
    return function (u, value) {
      if (value === null || value === undefined) return "—";
      return percent ? value.toFixed(1) + "%" : String(Math.round(value * 100) / 100);
    };
  }

  // Times in the page's language, on a 24-hour clock (uPlot's own are English, 12-hour), in the
  // user's time zone (the body's data-time-zone, as every time the console prints), which the
  // time axis names: a tick at midnight shows its date, any other its hour; the legend both.
  var LANG = document.documentElement.lang || undefined;
  var ZONE = document.body.getAttribute("data-time-zone") || "UTC";
  var HOUR = new Intl.DateTimeFormat(LANG, {
    hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: ZONE,
  });
  var DAY = new Intl.DateTimeFormat(LANG, { month: "short", day: "numeric", timeZone: ZONE });
  var MOMENT = new Intl.DateTimeFormat(LANG, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23",
    timeZone: ZONE,
  });

  function tick(seconds) {
    var date = new Date(seconds * 1000);
    var clock = HOUR.format(date);
    return /^(00|24):00$/.test(clock) ? DAY.format(date) : clock;
  }

  function moment(u, seconds) {
    return seconds === null || seconds === undefined ? "—" : MOMENT.format(new Date(seconds * 1000));
  }

  function draw(plot) {
    var data = JSON.parse(document.getElementById(plot.getAttribute("data-chart")).textContent);
    var percent = data.unit === "%";
    var limits = data.limits || [];
    var highest = limits.reduce(function (top, limit) { return Math.max(top, limit.value); }, 0);
    // The time series names itself in the page's language (uPlot's own word is English).
    var series = [{ label: plot.getAttribute("data-time-label"), value: moment }].concat(data.series.map(function (s, i) {
      return {
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        width: 2,
        points: { show: true, size: 5 },
        value: format(percent),
      };
    }));
    var options = {
      width: Math.max(320, plot.parentNode.clientWidth - 40),
      height: 220,
      // Ticks fall on the hours of the user's zone, not the browser's.
      tzDate: function (ts) { return window.uPlot.tzDate(new Date(ts * 1000), ZONE); },
      series: series,
      plugins: [limitLines(limits)],
      scales: {
        // The dashboard's range, not the data's: one bucket of data would span years.
        x: { time: true, range: function () { return [data.start, data.end]; } },
        // A count's axis reaches above its highest threshold, so the line is always on the plot.
        y: {
          range: function (u, min, max) {
            return [0, percent ? 100 : Math.max(1, Math.ceil(max), Math.ceil(highest * 1.25))];
          },
        },
      },
      axes: [
        {
          label: plot.getAttribute("data-x-label") + " · " + ZONE,
          values: function (u, ticks) { return ticks.map(tick); },
        },
        {
          label: plot.getAttribute("data-y-label"),
          size: 60,
          values: function (u, ticks) {
            return ticks.map(function (t) { return percent ? t + "%" : String(t); });
          },
        },
      ],
    };
    plot.hidden = false;
    new window.uPlot(options, [data.times].concat(data.series.map(function (s) { return s.values; })), plot);
    var numbers = plot.parentNode.querySelector("details.chart-numbers");
    if (numbers) numbers.hidden = true;
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (typeof window.uPlot !== "function") return;
    document.querySelectorAll("[data-chart]").forEach(draw);
  });
})();
