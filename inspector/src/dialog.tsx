import type { ComponentChildren } from 'preact';
import { useEffect, useRef } from 'preact/hooks';

/** A modal <dialog>: the browser keeps focus inside it and closes it on Esc; focus returns where it was. */
export function Dialog({ title, onClose, children }: { title: string; onClose(): void; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    const opener = document.activeElement as HTMLElement | null;
    dialog?.showModal();
    return () => {
      dialog?.close();
      opener?.focus?.();
    };
  }, []);
  return (
    <dialog
      ref={ref}
      aria-label={title}
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
    >
      <header class="dialog-head">
        <h2>{title}</h2>
        <button type="button" class="icon" aria-label="Close" onClick={onClose}>
          ×
        </button>
      </header>
      <div class="dialog-body">{children}</div>
    </dialog>
  );
}
