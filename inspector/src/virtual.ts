import { elementScroll, observeElementOffset, observeElementRect, type VirtualItem, Virtualizer } from '@tanstack/virtual-core';
import type { RefObject } from 'preact';
import { useLayoutEffect, useMemo, useReducer, useRef, useState } from 'preact/hooks';

export interface VirtualList {
  items: VirtualItem[];
  totalSize: number;
  scrollToIndex(index: number): void;
}

/**
 * The rows of a scrolling element that are in view (and a few more): a Preact binding of
 * @tanstack/virtual-core. The virtualizer calls back when the range changes; that re-renders.
 */
export function useVirtualList(scrollRef: RefObject<HTMLElement | null>, count: number, rowHeight: number, overscan = 12): VirtualList {
  const [, rerender] = useReducer((n: number) => n + 1, 0);
  // A stable function: the virtualizer recomputes every row's offset when it changes.
  const estimateSize = useMemo(() => () => rowHeight, [rowHeight]);
  const [virtualizer] = useState(
    () =>
      new Virtualizer<HTMLElement, HTMLElement>({
        count,
        getScrollElement: () => scrollRef.current,
        estimateSize,
        scrollToFn: elementScroll,
        observeElementRect,
        observeElementOffset,
        overscan,
        onChange: () => rerender(0),
      }),
  );
  virtualizer.setOptions({
    ...virtualizer.options,
    count,
    estimateSize,
    overscan,
  });
  useLayoutEffect(() => virtualizer._didMount(), [virtualizer]);
  useLayoutEffect(() => {
    virtualizer._willUpdate();
  });
  return {
    items: virtualizer.getVirtualItems(),
    totalSize: virtualizer.getTotalSize(),
    scrollToIndex: (index) => virtualizer.scrollToIndex(index, { align: 'auto' }),
  };
}

/**
 * The row the keyboard is on. Read through `get()` in handlers: keys pressed faster than the page
 * re-renders then still add up.
 */
export function useActiveRow(count: number): { get(): number; set(index: number): void } {
  const ref = useRef(0);
  const [, rerender] = useReducer((n: number) => n + 1, 0);
  ref.current = Math.min(ref.current, Math.max(0, count - 1));
  return {
    get: () => ref.current,
    set: (index) => {
      ref.current = index;
      rerender(0);
    },
  };
}
