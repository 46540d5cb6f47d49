/**
 * Compiles a tool's module graph (from the code cache the loader made) in one isolate and links it in
 * one context. Linking runs no tool code: that starts when the generated main module is evaluated.
 * It runs while a warm context is prepared for the tool last called (off the call path), or at call time
 * when the warm context was prepared for another tool. Synchronous on purpose: the isolate is idle then,
 * and the async forms cost this thread more (each captures a stack trace).
 */

function plan(graph, generated) {
  const items = [];
  for (const mod of graph.modules.values())
    items.push({ key: mod.key, source: mod.source, name: mod.name, cachedData: mod.cachedData, lineOffset: mod.lineOffset });
  items.push({ key: 'arium:main', ...generated.main });
  items.push({ key: 'arium:start', ...generated.start });
  return items;
}

function options(item) {
  const out = { filename: item.name };
  if (item.cachedData) out.cachedData = item.cachedData;
  // A code-mode program's module starts with a line of its own (loader.mjs `program`).
  if (item.lineOffset) out.lineOffset = item.lineOffset;
  return out;
}

function resolver(graph, compiled) {
  const keys = new Map();
  for (const [key, module] of compiled) keys.set(module, key);
  const main = compiled.get('arium:main');
  return (specifier, referrer) => {
    if (referrer === main) return compiled.get(specifier === 'arium:start' ? 'arium:start' : graph.entryKey);
    const key = graph.modules.get(keys.get(referrer))?.deps.get(specifier);
    const target = key === undefined ? undefined : compiled.get(key);
    if (!target) throw new Error(`Cannot resolve "${specifier}"`);
    return target;
  };
}

/**
 * A graph with more source than this is compiled on the isolate's own thread (`link`): compiling a
 * module near the 8 MB limit in an isolate that has not seen it takes about 0.4 s, which on this
 * process's thread would hold every other call. Smaller ones are compiled here, where it is cheaper.
 */
export const ASYNC_COMPILE_CHARS = 256 * 1024;

/** linkSync, but a large graph's modules are compiled on the isolate's thread (see ASYNC_COMPILE_CHARS). */
export async function link(isolate, context, graph, generated) {
  if (graph.bytes <= ASYNC_COMPILE_CHARS) return linkSync(isolate, context, graph, generated);
  const items = plan(graph, generated);
  const modules = [];
  try {
    for (const item of items) modules.push(await isolate.compileModule(item.source, options(item)));
  } catch (error) {
    release({ modules });
    throw error;
  }
  return instantiate(context, graph, items, modules);
}

/** { graph, main, modules }: `modules` must be released when the context is. */
export function linkSync(isolate, context, graph, generated) {
  const items = plan(graph, generated);
  const modules = [];
  try {
    for (const item of items) modules.push(isolate.compileModuleSync(item.source, options(item)));
  } catch (error) {
    release({ modules });
    throw error;
  }
  return instantiate(context, graph, items, modules);
}

/** Links the compiled modules (one per plan item, in order) in the context. */
function instantiate(context, graph, items, modules) {
  const linked = { graph, main: null, modules };
  try {
    const compiled = new Map(items.map((item, i) => [item.key, modules[i]]));
    linked.main = compiled.get('arium:main');
    linked.main.instantiateSync(context, resolver(graph, compiled));
    return linked;
  } catch (error) {
    release(linked);
    throw error;
  }
}

export function release(linked) {
  if (!linked) return;
  for (const module of linked.modules) {
    try {
      module.release();
    } catch {
      // Already gone with a disposed isolate.
    }
  }
  linked.modules = [];
}
