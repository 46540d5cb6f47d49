import { useState } from 'preact/hooks';
import type { JsonSchema } from './api';

/**
 * A form generated from a tool's input schema. It covers what tool schemas mostly are (objects of
 * strings, numbers, booleans, enums, arrays of those, nested objects); anything else is edited as
 * JSON, field by field, or for the whole input with the tool view's JSON toggle.
 */

export type Violations = Map<string, string[]>;

type Value = unknown;
type Obj = Record<string, Value>;

/** The schema's main type: the first that is not "null". */
function typeOf(schema: JsonSchema): string | undefined {
  if (Array.isArray(schema.type)) return schema.type.find((t) => t !== 'null');
  if (schema.type) return schema.type;
  if (schema.properties) return 'object';
  return undefined;
}

const PRIMITIVES = new Set(['string', 'number', 'integer', 'boolean']);

/** True when the form can show every field of this object schema (else the page starts in JSON mode). */
export function formCanExpress(schema: JsonSchema): boolean {
  return typeOf(schema) === 'object' && !schema.$ref && !schema.anyOf && !schema.allOf;
}

/** The schema's defaults, for a new form. */
export function initialValue(schema: JsonSchema): Obj {
  const out: Obj = {};
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    if (prop.default !== undefined) out[key] = structuredClone(prop.default);
    else if (typeOf(prop) === 'object' && prop.properties && schema.required?.includes(key)) out[key] = initialValue(prop);
  }
  return out;
}

export function escapePointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** The pointers the form shows a field for, so other violations can be shown at its top. */
export function formPointers(schema: JsonSchema, base = ''): Set<string> {
  const out = new Set<string>();
  for (const [key, prop] of Object.entries(schema.properties ?? {})) {
    const pointer = `${base}/${escapePointer(key)}`;
    out.add(pointer);
    if (typeOf(prop) === 'object' && prop.properties) for (const inner of formPointers(prop, pointer)) out.add(inner);
  }
  return out;
}

/** The field a violation belongs to: itself, or the nearest field above it (an array's item → the array). */
export function fieldOf(pointer: string, known: Set<string>): string {
  let p = pointer;
  while (p !== '') {
    if (known.has(p)) return p;
    p = p.slice(0, p.lastIndexOf('/'));
  }
  return '';
}

interface FormProps {
  schema: JsonSchema;
  value: Obj;
  onChange(value: Obj): void;
  violations: Violations;
  idPrefix: string;
}

export function SchemaForm({ schema, value, onChange, violations, idPrefix }: FormProps) {
  return <ObjectFields schema={schema} value={value} onChange={onChange} violations={violations} pointer="" idPrefix={idPrefix} />;
}

interface FieldsProps extends FormProps {
  pointer: string;
}

function ObjectFields({ schema, value, onChange, violations, pointer, idPrefix }: FieldsProps) {
  const entries = Object.entries(schema.properties ?? {});
  if (entries.length === 0) return <p class="muted">This tool takes no input fields.</p>;
  return (
    <div class="fields">
      {entries.map(([key, prop]) => {
        const path = `${pointer}/${escapePointer(key)}`;
        const set = (next: Value) => {
          const copy = { ...value };
          if (next === undefined) delete copy[key];
          else copy[key] = next;
          onChange(copy);
        };
        return (
          <Field
            key={key}
            name={key}
            schema={prop}
            required={schema.required?.includes(key) ?? false}
            value={value[key]}
            onChange={set}
            violations={violations}
            pointer={path}
            idPrefix={idPrefix}
          />
        );
      })}
    </div>
  );
}

interface FieldProps {
  name: string;
  schema: JsonSchema;
  required: boolean;
  value: Value;
  onChange(value: Value): void;
  violations: Violations;
  pointer: string;
  idPrefix: string;
}

function Field(props: FieldProps) {
  const { name, schema, required, pointer, violations, idPrefix } = props;
  const id = `${idPrefix}-${pointer.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  const errors = violations.get(pointer) ?? [];
  const type = typeOf(schema);
  const nested = type === 'object' && schema.properties !== undefined;
  const label = (
    <span class="field-name">
      {schema.title ?? name}
      {required ? (
        <span class="required" title="required">
          {' *'}
        </span>
      ) : null}
      {type ? <span class="field-type">{schema.enum ? 'enum' : type}</span> : null}
    </span>
  );
  const help = schema.description ? (
    <span class="field-help" id={`${id}-help`}>
      {schema.description}
    </span>
  ) : null;
  const errorList =
    errors.length > 0 ? (
      <ul class="field-errors" id={`${id}-errors`} data-pointer={pointer}>
        {errors.map((message) => (
          <li key={message}>{message}</li>
        ))}
      </ul>
    ) : null;
  const describedBy = [schema.description ? `${id}-help` : '', errors.length > 0 ? `${id}-errors` : ''].filter(Boolean).join(' ') || undefined;

  if (nested) {
    const objectValue = (typeof props.value === 'object' && props.value !== null && !Array.isArray(props.value) ? props.value : {}) as Obj;
    return (
      <fieldset class={`field nested${errors.length ? ' invalid' : ''}`} data-pointer={pointer}>
        <legend>{label}</legend>
        {help}
        {errorList}
        <ObjectFields
          schema={schema}
          value={objectValue}
          onChange={(next) => props.onChange(Object.keys(next).length === 0 && !required ? undefined : next)}
          violations={violations}
          pointer={pointer}
          idPrefix={idPrefix}
        />
      </fieldset>
    );
  }
  const control = <Control {...props} id={id} describedBy={describedBy} invalid={errors.length > 0} />;
  if (type === 'boolean' && !schema.enum) {
    return (
      <div class={`field check${errors.length ? ' invalid' : ''}`} data-pointer={pointer}>
        <label for={id} class="check-label">
          {control}
          {label}
        </label>
        {help}
        {errorList}
      </div>
    );
  }
  return (
    <div class={`field${errors.length ? ' invalid' : ''}`} data-pointer={pointer}>
      <label for={id}>{label}</label>
      {help}
      {control}
      {errorList}
    </div>
  );
}

interface ControlProps extends FieldProps {
  id: string;
  describedBy: string | undefined;
  invalid: boolean;
}

const LONG_TEXT = /content|text|body|code|source|script|message|markdown|template/i;

function Control({ name, schema, required, value, onChange, id, describedBy, invalid }: ControlProps) {
  const type = typeOf(schema);
  const common = { id, 'aria-describedby': describedBy, 'aria-invalid': invalid || undefined, 'aria-required': required || undefined };
  if (schema.enum) {
    const options = schema.enum;
    const index = options.findIndex((o) => JSON.stringify(o) === JSON.stringify(value));
    return (
      <select
        {...common}
        value={index < 0 ? '' : String(index)}
        onChange={(e) => {
          const i = (e.currentTarget as HTMLSelectElement).value;
          onChange(i === '' ? undefined : options[Number(i)]);
        }}
      >
        <option value="">{required ? '— choose —' : '— not set —'}</option>
        {options.map((option, i) => (
          <option key={JSON.stringify(option)} value={String(i)}>
            {typeof option === 'string' ? option : JSON.stringify(option)}
          </option>
        ))}
      </select>
    );
  }
  if (type === 'string') {
    const text = typeof value === 'string' ? value : '';
    const set = (next: string) => onChange(next === '' && !required ? undefined : next);
    const long = LONG_TEXT.test(name) && (schema.maxLength === undefined || schema.maxLength > 200);
    if (long)
      return <textarea {...common} rows={5} value={text} spellcheck={false} onInput={(e) => set((e.currentTarget as HTMLTextAreaElement).value)} />;
    return <input {...common} type="text" value={text} spellcheck={false} onInput={(e) => set((e.currentTarget as HTMLInputElement).value)} />;
  }
  if (type === 'number' || type === 'integer') {
    return (
      <NumberInput
        common={common}
        value={typeof value === 'number' ? value : undefined}
        integer={type === 'integer'}
        min={schema.minimum}
        max={schema.maximum}
        onChange={onChange}
      />
    );
  }
  if (type === 'boolean') {
    return <input {...common} type="checkbox" checked={value === true} onChange={(e) => onChange((e.currentTarget as HTMLInputElement).checked)} />;
  }
  if (type === 'array' && schema.items && !Array.isArray(schema.items) && PRIMITIVES.has(typeOf(schema.items) ?? '') && !schema.items.enum) {
    return <PrimitiveArray common={common} item={schema.items} value={Array.isArray(value) ? value : []} required={required} onChange={onChange} />;
  }
  return <JsonValue common={common} value={value} onChange={onChange} />;
}

type Common = Record<string, unknown> & { id: string };

function NumberInput({
  common,
  value,
  integer,
  min,
  max,
  onChange,
}: {
  common: Common;
  value: number | undefined;
  integer: boolean;
  min: number | undefined;
  max: number | undefined;
  onChange(value: Value): void;
}) {
  // The text as typed: "1e" or "-" are on their way to a number and must not be wiped.
  const [text, setText] = useState(value === undefined ? '' : String(value));
  const shown = value === undefined ? (text.trim() === '' ? '' : text) : Number(text) === value ? text : String(value);
  return (
    <input
      {...common}
      type="number"
      step={integer ? 1 : 'any'}
      min={min}
      max={max}
      value={shown}
      onInput={(e) => {
        const next = (e.currentTarget as HTMLInputElement).value;
        setText(next);
        if (next.trim() === '') onChange(undefined);
        else if (Number.isFinite(Number(next))) onChange(Number(next));
      }}
    />
  );
}

function PrimitiveArray({
  common,
  item,
  value,
  required,
  onChange,
}: {
  common: Common;
  item: JsonSchema;
  value: Value[];
  required: boolean;
  onChange(value: Value): void;
}) {
  const type = typeOf(item);
  const set = (next: Value[]) => onChange(next.length === 0 && !required ? undefined : next);
  const parse = (text: string): Value => {
    if (type === 'number' || type === 'integer') return text.trim() === '' || !Number.isFinite(Number(text)) ? text : Number(text);
    if (type === 'boolean') return text === 'true';
    return text;
  };
  return (
    <fieldset class="array" id={common.id}>
      {value.map((entry, i) => (
        // The entries are plain values edited in place: the index is their identity.
        <div class="array-item" key={i}>
          {type === 'boolean' ? (
            <select
              aria-label={`item ${i + 1}`}
              value={String(entry)}
              onChange={(e) => set(value.map((v, j) => (j === i ? parse((e.currentTarget as HTMLSelectElement).value) : v)))}
            >
              <option value="true">true</option>
              <option value="false">false</option>
            </select>
          ) : type === 'string' ? (
            <input
              aria-label={`item ${i + 1}`}
              type="text"
              value={entry === undefined ? '' : String(entry)}
              onInput={(e) => set(value.map((v, j) => (j === i ? parse((e.currentTarget as HTMLInputElement).value) : v)))}
            />
          ) : (
            <input
              aria-label={`item ${i + 1}`}
              type="number"
              value={entry === undefined ? '' : String(entry)}
              onInput={(e) => set(value.map((v, j) => (j === i ? parse((e.currentTarget as HTMLInputElement).value) : v)))}
            />
          )}
          <button type="button" class="small" aria-label={`Remove item ${i + 1}`} onClick={() => set(value.filter((_, j) => j !== i))}>
            ×
          </button>
        </div>
      ))}
      <button type="button" class="small" onClick={() => set([...value, type === 'boolean' ? false : type === 'string' ? '' : 0])}>
        + Add
      </button>
    </fieldset>
  );
}

/** A value the form has no control for, edited as JSON; kept as typed until it parses. */
function JsonValue({ common, value, onChange }: { common: Common; value: Value; onChange(value: Value): void }) {
  const [text, setText] = useState(value === undefined ? '' : JSON.stringify(value, null, 2));
  const [error, setError] = useState<string | null>(null);
  return (
    <div>
      <textarea
        {...common}
        class="code"
        rows={4}
        spellcheck={false}
        placeholder="JSON"
        value={text}
        onInput={(e) => {
          const next = (e.currentTarget as HTMLTextAreaElement).value;
          setText(next);
          if (next.trim() === '') {
            setError(null);
            onChange(undefined);
            return;
          }
          try {
            onChange(JSON.parse(next));
            setError(null);
          } catch (problem) {
            setError((problem as Error).message);
          }
        }}
      />
      {error ? <span class="field-help warn">Not JSON yet: {error}</span> : null}
    </div>
  );
}
