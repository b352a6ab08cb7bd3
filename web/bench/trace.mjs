// Main-thread work in a Chrome trace: the top-level tasks of the page's renderer main thread. A task's CPU time
// (`tdur`) is what the page cost; its wall time (`dur`) also counts time the thread waited for a core, which on a
// busy machine can be most of it. Both are returned, in milliseconds.

export function mainThreadBusy(trace) {
  const events = trace.traceEvents ?? trace;
  const mains = new Set(
    events
      .filter((e) => e.ph === 'M' && e.name === 'thread_name' && e.args?.name === 'CrRendererMain')
      .map((e) => `${e.pid}:${e.tid}`),
  );
  // The page's renderer is the one whose main thread ran the most tasks.
  const perThread = new Map();
  for (const e of events) {
    if (e.ph !== 'X' || !(e.name === 'RunTask' || e.name === 'ThreadControllerImpl::RunTask')) continue;
    const key = `${e.pid}:${e.tid}`;
    if (!mains.has(key)) continue;
    const list = perThread.get(key) ?? [];
    list.push({ wall: e.dur / 1000, cpu: (e.tdur ?? e.dur) / 1000 });
    perThread.set(key, list);
  }
  const sum = (list, k) => list.reduce((a, t) => a + t[k], 0);
  let best = [];
  for (const list of perThread.values()) if (sum(list, 'cpu') > sum(best, 'cpu')) best = list;
  return {
    total: sum(best, 'cpu'),
    wall: sum(best, 'wall'),
    longest: Math.max(0, ...best.map((t) => t.wall)),
    over50: best.filter((t) => t.wall > 50).length,
    longestCpu: Math.max(0, ...best.map((t) => t.cpu)),
    over50Cpu: best.filter((t) => t.cpu > 50).length,
  };
}
