// The served OpenAPI document through the tools a client author runs on it: swagger-parser
// validates it (schema and $refs), openapi-typescript generates types from it. TestOpenAPITools
// runs it with OPENAPI_URL set; it exits non-zero with the tool's error.
import SwaggerParser from '@apidevtools/swagger-parser';
import openapiTS, { astToString } from 'openapi-typescript';

const url = process.env.OPENAPI_URL;
const doc = await (await fetch(url)).json();
await SwaggerParser.validate(structuredClone(doc));
const ts = astToString(await openapiTS(doc));
if (!ts.includes('paths') || !ts.includes('components')) throw new Error('openapi-typescript wrote no paths or components');
console.log('ok');
